"""The signing page's HTML: Jinja templates (autoescaped: every value from outside is escaped) and their words.

One layout serves every state of a link (sign, signed, expired, superseded, not valid, refused).
The pages need no JavaScript, no image and nothing from another host; their only style is the small
inline sheet below, allowed by the nonce of each answer's Content-Security-Policy. Locales are the
reminder emails' (en, fr, es, de, it).
"""

from __future__ import annotations

import re
from typing import Any

import jinja2

LOCALES = ("en", "fr", "es", "de", "it")
DEFAULT_LOCALE = "en"

STYLE = (
    "body{font-family:system-ui,sans-serif;line-height:1.5;max-width:40em;margin:0 auto;padding:1em;"
    "color:#1a1a1a;background:#fff}h1{font-size:1.4em}dl{display:grid;grid-template-columns:auto 1fr;"
    "gap:.25em 1em}dt{font-weight:600}dd{margin:0;overflow-wrap:anywhere}code{font-size:.9em}"
    ".box{border:1px solid #ccc;border-radius:.5em;padding:1em;margin:1em 0}"
    "label{display:flex;gap:.6em;align-items:flex-start;margin:1em 0}input[type=checkbox]{width:1.4em;"
    "height:1.4em;flex:none}button,.button{display:inline-block;font-size:1.1em;padding:.7em 1.4em;"
    "border:0;border-radius:.4em;background:#1f5fbf;color:#fff;text-decoration:none;min-height:44px}"
    ".note{color:#555}"
)

_LAYOUT = """<!doctype html>
<html lang="{{ locale }}"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{{ heading }}</title><style nonce="{{ nonce }}">{{ style }}</style></head>
<body><main><h1>{{ heading }}</h1>
{% for line in lines %}<p>{{ line }}</p>
{% endfor %}{% if doc %}<div class="box"><dl>
<dt>{{ t.document }}</dt><dd>{{ doc.title }}</dd>
{% if doc.url %}<dt>{{ t.source }}</dt><dd><a href="{{ doc.url }}" rel="noopener noreferrer">{{ doc.url }}</a></dd>
{% endif %}{% if doc.checksum %}<dt>{{ t.checksum }}</dt><dd><code>{{ doc.checksum_algorithm }}: {{ doc.checksum }}</code></dd>
{% endif %}<dt>{{ t.signer }}</dt><dd>{{ signer }}</dd>
{% if receipt %}<dt>{{ t.signature }}</dt><dd>#{{ receipt.id }}</dd>
<dt>{{ t.signed_at }}</dt><dd>{{ signed_at }}</dd>
<dt>{{ t.payload_hash }}</dt><dd><code>{{ receipt.payload_hash }}</code></dd>
{% endif %}</dl>{% if doc.description %}<p>{{ doc.description }}</p>{% endif %}</div>
{% endif %}{% if form %}<form method="post" action="{{ form.action }}">
<input type="hidden" name="csrf" value="{{ form.csrf }}">
<input type="hidden" name="referer" value="{{ form.referer }}">
<label><input type="checkbox" name="consent" value="yes" required>
<span>{{ consent }}</span></label>
<button type="submit">{{ t.sign }}</button></form>
{% endif %}{% if login %}<p><a class="button" href="{{ login }}">{{ t.sign_in }}</a></p>
{% endif %}</main></body></html>
"""

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
_TEMPLATE = _ENV.from_string(_LAYOUT)

# Keys: headings and sentences of each state; {title} is filled after escaping (by Jinja).
MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "document": "Document", "source": "Source", "checksum": "Checksum", "signer": "Signer",
        "signature": "Signature", "signed_at": "Signed at", "payload_hash": "Payload hash",
        "sign": "Sign", "sign_in": "Sign in to sign",
        "consent": "I have read “{title}” and I sign it.",
        "sign_heading": "Sign “{title}”",
        "sign_intro": "Read the document, then tick the box and press Sign. Your signature is recorded "
                      "with the time, your address and this browser.",
        "login_intro": "This document asks signers to sign in first with their account at {issuer}.",
        "signed_heading": "You signed “{title}”",
        "signed_intro": "Your signature is recorded; a receipt is on its way to your address. Nothing "
                        "more to do.",
        "already_heading": "Already signed",
        "already_intro": "You signed this document already: this link is used up. Nothing more to do.",
        "expired_heading": "This link has expired",
        "expired_intro": "Signing links are valid for a limited time. Ask whoever asked you to sign for "
                         "a new link; the next reminder email carries one too.",
        "superseded_heading": "The document has changed",
        "superseded_intro": "This link was made for an earlier version of the document, which was "
                            "replaced since. Use the link in the newest email you received about it, or "
                            "ask for a new one.",
        "invalid_heading": "This link is not valid",
        "invalid_intro": "Check that you opened the whole link from your email (some mail programs "
                         "break long links); if it still fails, ask whoever sent it for a new one.",
        "consent_heading": "Tick the box to sign",
        "consent_intro": "Nothing was signed: the box saying you have read the document was not "
                         "ticked. Go back to the page, tick it and press Sign.",
        "csrf_heading": "Please reload the page",
        "csrf_intro": "Nothing was signed: this form is too old or did not come from this page. Open "
                      "your link again, then sign.",
        "login_heading": "Sign in first",
        "login_refused": "Nothing was signed: this document asks signers to sign in first.",
        "busy_heading": "Too many requests",
        "busy_intro": "Please wait a minute and try again.",
        "back": "Back to the page",
    },
    "fr": {
        "document": "Document", "source": "Source", "checksum": "Empreinte", "signer": "Signataire",
        "signature": "Signature", "signed_at": "Signée le", "payload_hash": "Empreinte signée",
        "sign": "Signer", "sign_in": "Se connecter pour signer",
        "consent": "J'ai lu « {title} » et je le signe.",
        "sign_heading": "Signer « {title} »",
        "sign_intro": "Lisez le document, puis cochez la case et appuyez sur Signer. Votre signature "
                      "est enregistrée avec l'heure, votre adresse et ce navigateur.",
        "login_intro": "Ce document demande aux signataires de se connecter d'abord avec leur compte {issuer}.",
        "signed_heading": "Vous avez signé « {title} »",
        "signed_intro": "Votre signature est enregistrée ; un reçu part vers votre adresse. Rien "
                        "d'autre à faire.",
        "already_heading": "Déjà signé",
        "already_intro": "Vous avez déjà signé ce document : ce lien a servi. Rien d'autre à faire.",
        "expired_heading": "Ce lien a expiré",
        "expired_intro": "Les liens de signature ont une durée limitée. Demandez un nouveau lien à la "
                         "personne qui vous a demandé de signer ; le prochain rappel en contient un aussi.",
        "superseded_heading": "Le document a changé",
        "superseded_intro": "Ce lien a été fait pour une version antérieure du document, remplacée "
                            "depuis. Utilisez le lien du message le plus récent, ou demandez-en un nouveau.",
        "invalid_heading": "Ce lien n'est pas valide",
        "invalid_intro": "Vérifiez que vous avez ouvert le lien entier de votre message (certains "
                         "logiciels coupent les liens longs) ; sinon, demandez-en un nouveau.",
        "consent_heading": "Cochez la case pour signer",
        "consent_intro": "Rien n'a été signé : la case indiquant que vous avez lu le document n'était "
                         "pas cochée. Revenez à la page, cochez-la et appuyez sur Signer.",
        "csrf_heading": "Veuillez recharger la page",
        "csrf_intro": "Rien n'a été signé : ce formulaire est trop ancien ou ne vient pas de cette "
                      "page. Rouvrez votre lien, puis signez.",
        "login_heading": "Connectez-vous d'abord",
        "login_refused": "Rien n'a été signé : ce document demande aux signataires de se connecter d'abord.",
        "busy_heading": "Trop de requêtes",
        "busy_intro": "Patientez une minute et réessayez.",
        "back": "Revenir à la page",
    },
    "es": {
        "document": "Documento", "source": "Origen", "checksum": "Suma de comprobación",
        "signer": "Firmante", "signature": "Firma", "signed_at": "Firmado el",
        "payload_hash": "Hash firmado", "sign": "Firmar", "sign_in": "Iniciar sesión para firmar",
        "consent": "He leído «{title}» y lo firmo.",
        "sign_heading": "Firmar «{title}»",
        "sign_intro": "Lea el documento, marque la casilla y pulse Firmar. Su firma se registra con la "
                      "hora, su dirección y este navegador.",
        "login_intro": "Este documento pide a los firmantes que inicien sesión primero con su cuenta de {issuer}.",
        "signed_heading": "Ha firmado «{title}»",
        "signed_intro": "Su firma está registrada; le enviamos un recibo a su dirección. No hay nada "
                        "más que hacer.",
        "already_heading": "Ya firmado",
        "already_intro": "Ya firmó este documento: este enlace ya se usó. No hay nada más que hacer.",
        "expired_heading": "Este enlace ha caducado",
        "expired_intro": "Los enlaces de firma tienen una validez limitada. Pida un enlace nuevo a quien "
                         "le pidió firmar; el próximo recordatorio también trae uno.",
        "superseded_heading": "El documento ha cambiado",
        "superseded_intro": "Este enlace se hizo para una versión anterior del documento, que ya se "
                            "reemplazó. Use el enlace del mensaje más reciente o pida uno nuevo.",
        "invalid_heading": "Este enlace no es válido",
        "invalid_intro": "Compruebe que abrió el enlace completo de su mensaje (algunos programas cortan "
                         "los enlaces largos); si sigue fallando, pida uno nuevo.",
        "consent_heading": "Marque la casilla para firmar",
        "consent_intro": "No se firmó nada: la casilla que indica que leyó el documento no estaba "
                         "marcada. Vuelva a la página, márquela y pulse Firmar.",
        "csrf_heading": "Vuelva a cargar la página",
        "csrf_intro": "No se firmó nada: este formulario es antiguo o no viene de esta página. Abra su "
                      "enlace de nuevo y firme.",
        "login_heading": "Inicie sesión primero",
        "login_refused": "No se firmó nada: este documento pide iniciar sesión primero.",
        "busy_heading": "Demasiadas solicitudes",
        "busy_intro": "Espere un minuto y vuelva a intentarlo.",
        "back": "Volver a la página",
    },
    "de": {
        "document": "Dokument", "source": "Quelle", "checksum": "Prüfsumme", "signer": "Unterzeichner",
        "signature": "Unterschrift", "signed_at": "Unterschrieben am", "payload_hash": "Signierter Hash",
        "sign": "Unterschreiben", "sign_in": "Anmelden zum Unterschreiben",
        "consent": "Ich habe „{title}“ gelesen und unterschreibe es.",
        "sign_heading": "„{title}“ unterschreiben",
        "sign_intro": "Lesen Sie das Dokument, setzen Sie dann das Häkchen und drücken Sie "
                      "Unterschreiben. Ihre Unterschrift wird mit Uhrzeit, Ihrer Adresse und diesem "
                      "Browser gespeichert.",
        "login_intro": "Für dieses Dokument melden sich Unterzeichner zuerst mit ihrem Konto bei {issuer} an.",
        "signed_heading": "Sie haben „{title}“ unterschrieben",
        "signed_intro": "Ihre Unterschrift ist gespeichert; eine Bestätigung geht an Ihre Adresse. "
                        "Sonst ist nichts zu tun.",
        "already_heading": "Bereits unterschrieben",
        "already_intro": "Sie haben dieses Dokument bereits unterschrieben: dieser Link ist verbraucht.",
        "expired_heading": "Dieser Link ist abgelaufen",
        "expired_intro": "Unterschriftslinks gelten nur eine begrenzte Zeit. Bitten Sie um einen neuen "
                         "Link; die nächste Erinnerung enthält ebenfalls einen.",
        "superseded_heading": "Das Dokument wurde geändert",
        "superseded_intro": "Dieser Link gehört zu einer früheren Fassung des Dokuments, die inzwischen "
                            "ersetzt wurde. Nutzen Sie den Link aus der neuesten Nachricht oder bitten "
                            "Sie um einen neuen.",
        "invalid_heading": "Dieser Link ist ungültig",
        "invalid_intro": "Prüfen Sie, ob Sie den ganzen Link aus Ihrer Nachricht geöffnet haben (manche "
                         "Programme trennen lange Links); sonst bitten Sie um einen neuen.",
        "consent_heading": "Setzen Sie das Häkchen zum Unterschreiben",
        "consent_intro": "Es wurde nichts unterschrieben: das Häkchen, dass Sie das Dokument gelesen "
                         "haben, fehlte. Gehen Sie zurück, setzen Sie es und drücken Sie Unterschreiben.",
        "csrf_heading": "Bitte laden Sie die Seite neu",
        "csrf_intro": "Es wurde nichts unterschrieben: dieses Formular ist zu alt oder stammt nicht von "
                      "dieser Seite. Öffnen Sie Ihren Link erneut und unterschreiben Sie dann.",
        "login_heading": "Bitte zuerst anmelden",
        "login_refused": "Es wurde nichts unterschrieben: für dieses Dokument ist eine Anmeldung nötig.",
        "busy_heading": "Zu viele Anfragen",
        "busy_intro": "Bitte warten Sie eine Minute und versuchen Sie es erneut.",
        "back": "Zurück zur Seite",
    },
    "it": {
        "document": "Documento", "source": "Origine", "checksum": "Checksum", "signer": "Firmatario",
        "signature": "Firma", "signed_at": "Firmato il", "payload_hash": "Hash firmato",
        "sign": "Firma", "sign_in": "Accedi per firmare",
        "consent": "Ho letto «{title}» e lo firmo.",
        "sign_heading": "Firma «{title}»",
        "sign_intro": "Legga il documento, poi spunti la casella e prema Firma. La firma viene "
                      "registrata con l'ora, il suo indirizzo e questo browser.",
        "login_intro": "Questo documento chiede ai firmatari di accedere prima con il loro account {issuer}.",
        "signed_heading": "Ha firmato «{title}»",
        "signed_intro": "La sua firma è registrata; una ricevuta è in arrivo al suo indirizzo. Non c'è "
                        "altro da fare.",
        "already_heading": "Già firmato",
        "already_intro": "Ha già firmato questo documento: questo link è stato usato. Non c'è altro da fare.",
        "expired_heading": "Questo link è scaduto",
        "expired_intro": "I link di firma valgono per un tempo limitato. Chieda un nuovo link a chi le "
                         "ha chiesto di firmare; anche il prossimo promemoria ne contiene uno.",
        "superseded_heading": "Il documento è cambiato",
        "superseded_intro": "Questo link era per una versione precedente del documento, poi sostituita. "
                            "Usi il link del messaggio più recente o ne chieda uno nuovo.",
        "invalid_heading": "Questo link non è valido",
        "invalid_intro": "Controlli di aver aperto il link completo del messaggio (alcuni programmi "
                         "spezzano i link lunghi); altrimenti ne chieda uno nuovo.",
        "consent_heading": "Spunti la casella per firmare",
        "consent_intro": "Non è stato firmato nulla: la casella che dice che ha letto il documento non "
                         "era spuntata. Torni alla pagina, la spunti e prema Firma.",
        "csrf_heading": "Ricarichi la pagina",
        "csrf_intro": "Non è stato firmato nulla: questo modulo è troppo vecchio o non viene da questa "
                      "pagina. Riapra il suo link e firmi.",
        "login_heading": "Acceda prima",
        "login_refused": "Non è stato firmato nulla: questo documento richiede l'accesso.",
        "busy_heading": "Troppe richieste",
        "busy_intro": "Attenda un minuto e riprovi.",
        "back": "Torna alla pagina",
    },
}  # fmt: skip

# A language tag and its quality; the header is cut to a bounded length before this runs.
_LANGUAGE = re.compile(r"\s*([A-Za-z]{1,8})(?:-[A-Za-z0-9]{1,8})*\s*(?:;\s*q\s*=\s*([01](?:\.\d{0,3})?))?\s*")
MAX_ACCEPT_LANGUAGE = 500


def choose_locale(accept_language: str | None, signer_locale: str | None) -> str:
    """The page's locale: the browser's best supported language, else the signer's, else English."""
    best: tuple[float, str] | None = None
    for part in (accept_language or "")[:MAX_ACCEPT_LANGUAGE].split(",")[:20]:
        match = _LANGUAGE.fullmatch(part)
        if match is None:
            continue
        language = match.group(1).lower()
        quality = float(match.group(2)) if match.group(2) else 1.0
        if language in MESSAGES and quality > 0 and (best is None or quality > best[0]):
            best = (quality, language)
    if best is not None:
        return best[1]
    fallback = (signer_locale or "").split("-")[0].lower()
    return fallback if fallback in MESSAGES else DEFAULT_LOCALE


def words(locale: str) -> dict[str, str]:
    """The page's words in `locale` (English for an unknown one)."""
    return MESSAGES.get(locale, MESSAGES[DEFAULT_LOCALE])


def render(locale: str, nonce: str, heading: str, lines: list[str], **context: Any) -> str:
    """A whole page; every value is escaped by Jinja's autoescape."""
    values: dict[str, Any] = {"doc": None, "signer": "", "receipt": None, "signed_at": "", "form": None,
                              "login": None, "consent": ""}  # fmt: skip
    values.update(context)
    return _TEMPLATE.render(
        locale=locale, nonce=nonce, style=STYLE, heading=heading, lines=lines, t=words(locale), **values
    )
